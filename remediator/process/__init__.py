"""What a running process needs around the domain: logging, metrics, the garbage collector, waiters."""

"""The Kubernetes vocabulary: the labels, taints and annotations the controller writes, the kinds it calls,
object names and the node inventory."""

"""gpu-remediator: turns GPU alerts from Alertmanager into audited, reversible cluster actions."""

__all__ = ["__version__"]

__version__ = "0.1.0"

"""Bootstrap of the embedded default's base agent: behaviour cloning of the imperfect scripted expert."""

from trace_train.bootstrap.config import BootstrapConfig

__all__ = ["BootstrapConfig"]

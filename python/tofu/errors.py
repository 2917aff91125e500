"""tofu's exceptions. Each carries the message the command-line tools print for the same
failure."""


class Error(RuntimeError):
    """Anything tofu reports as failed."""


class UsageError(Error, ValueError):
    """A setting or argument that cannot work (the tools exit 2 for these)."""


class ModelError(Error):
    """The model does not export, import or check: an unknown operator, shapes that do not
    agree, a file that is not ONNX."""


class PlanError(Error):
    """No plan: the search failed, or no plan fits the memory budget (the message says how
    close the closest came and how many workers it needs)."""


class DataError(Error):
    """Data that does not fit the model: a batch of the wrong shape, a label out of range."""

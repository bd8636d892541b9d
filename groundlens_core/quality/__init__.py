"""Quality measurement: AUROC, the simple baselines and ``groundlens benchmark``."""

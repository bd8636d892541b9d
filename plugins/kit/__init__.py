"""The adapter kit: what every adapter stands on and knows no framework (the shell, the revision decision)."""

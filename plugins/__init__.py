"""Framework adapters. Each module imports its framework lazily and says what to install if it is missing."""

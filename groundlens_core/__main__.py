import sys

from groundlens_core.cli import main

sys.exit(main())

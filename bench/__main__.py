"""python -m bench --profile quick|full|smoke: see bench/harness.py."""

import sys

from .harness import main

sys.exit(main())

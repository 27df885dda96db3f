"""``python -m fwrest``."""

import sys

from fwrest.cli import main

sys.exit(main())

import sys

from dsmlkit.cli import main

sys.exit(main())

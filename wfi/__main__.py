import sys

from wfi.cli import main

sys.exit(main())

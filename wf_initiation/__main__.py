import sys

from wf_initiation.cli import main

sys.exit(main())

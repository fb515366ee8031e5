import sys

from mrs.tools.cli import main

sys.exit(main())

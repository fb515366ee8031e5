import sys

from mrs.cli import main

sys.exit(main())

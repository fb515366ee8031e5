import sys

from mrs.tools.entry import main

sys.exit(main())

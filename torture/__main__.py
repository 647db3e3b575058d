import sys

from torture.run import main

sys.exit(main())

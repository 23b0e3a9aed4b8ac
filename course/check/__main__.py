import sys

from course.check.runner import main

sys.exit(main())

import os
import sys

from course.check.runner import main

code = main()
# The report is complete. Skip the interpreter's teardown: unloading MAX's runtime and
# torch costs about 1.2 s here, after the last line a learner waits for.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)

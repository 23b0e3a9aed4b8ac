"""Support code for the course: the MAX runtime setup, the stub renderer and the
friendly check runner. Learners never edit anything in here."""

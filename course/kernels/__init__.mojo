# The course's Mojo kernels, a package that MAX loads as a custom-op library (course.runtime.kernels()).

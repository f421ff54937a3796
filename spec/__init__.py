"""Executable specifications of the JVM code: pure-Python reference models that the differential tests
and the benchmark's oracle hold the job to. Nothing at run time imports them."""

"""What turns a config into work: the run plan, the command importer, the memory estimator
and the preflight checks. Imports the layers below; stages and jobs sit above it.
"""

"""The Python steps of the multi-process compile: the HLO text rewrite of a
partitioned program, and the compile options for this process's devices."""

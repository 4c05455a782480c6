"""Real-cluster test harness: network namespaces as hosts, and the real
launchers (Open MPI, Slurm)."""

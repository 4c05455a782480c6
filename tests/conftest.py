"""In-process tests compare myplugin with jax's own CPU backend, both with
8 devices, in one process. Tests that need a fresh process (backend
options, bad input) start children through proc.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

os.environ["JAX_PLATFORMS"] = "myplugin,cpu"
os.environ["MYPLUGIN_NUM_DEVICES"] = "8"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

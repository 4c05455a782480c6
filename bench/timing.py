"""Timing one call again and again, as the benchmarks' workers do."""
import statistics
import time


def timed(fn, reps):
  """(best, median) seconds of `reps` calls of `fn` after one untimed call:
  the warm-up compiles, and in a multi-process job every process reaches the
  collective before the clock starts."""
  fn()
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times), statistics.median(times)

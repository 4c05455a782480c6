"""Draws the myplugin planes of a job's profiles as one timeline, a band per
process, one row per thread, spans nested by depth: the picture of
docs/profiling.md.

usage: python docs/img/draw_profile.py OUT.png DIR [DIR ...]
  each DIR is a folder jax.profiler.trace wrote (one process's); needs matplotlib.
"""
import glob
import os
import sys

import jax

# Colours by what a span is; anything else (a program, a compile step) is grey-blue.
_COLOURS = {"wait for peers": "#e4572e", "move data": "#29335c", "collective": "#f3a712", "barrier": "#a8c686"}
_OTHER = "#7d98a1"


def load(folder):
  path = glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb"))[0]
  space = jax.profiler.ProfileData.from_file(path)
  start = dict(next(p for p in space.planes if p.name == "Task Environment").stats)["profile_start_time"]
  plane = next(p for p in space.planes if p.name.startswith("/device:CUSTOM:myplugin"))
  rows = []
  for line in plane.lines:
    events = sorted(((e.start_ns + start, e.duration_ns, e.name, dict(e.stats)) for e in line.events),
                    key=lambda e: (e[0], -e[1]))
    rows.append((line.name, events))
  return plane.name.split(":", 2)[2], rows


def colour(name, stats):
  if name in _COLOURS:
    return _COLOURS[name]
  if stats.get("kind") == "barrier":
    return _COLOURS["barrier"]
  if "kind" in stats:
    return _COLOURS["collective"]
  return _OTHER


def main(out, folders):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  processes = [load(f) for f in folders]
  origin = min(e[0] for _, rows in processes for _, events in rows for e in events)
  bands = [(title, name, events) for title, rows in processes for name, events in rows]
  fig, ax = plt.subplots(figsize=(11, 1.4 + 0.55 * len(bands)))
  labels = []
  for row, (title, thread, events) in enumerate(reversed(bands)):
    if row > 0 and title != list(reversed(bands))[row - 1][0]:
      ax.axhline(row, color="black", linewidth=0.8)
    ends = []  # the ends of the open spans: depth = how many still hold this one
    for start, duration, name, stats in events:
      while ends and ends[-1] <= start:
        ends.pop()
      depth = len(ends)
      ends.append(start + duration)
      x, w = (start - origin) / 1e9, max(duration / 1e9, 0.012)  # a short span still shows
      y = row + 0.66 - 0.3 * depth  # the outermost span on top
      ax.broken_barh([(x, w)], (y, 0.26), color=colour(name, stats), edgecolor="white", linewidth=0.3)
      if w > 0.25:
        ax.text(x + 0.01, y + 0.13, name, va="center", fontsize=7, color="white", clip_on=True)
    labels.append(f"{title}\n{thread}")
  ax.set_yticks([r + 0.5 for r in range(len(bands))])
  ax.set_yticklabels(labels, fontsize=8)
  ax.set_ylim(0, len(bands))
  ax.set_xlabel("seconds")
  kinds = {**_COLOURS, "program, run, compile step": _OTHER}
  handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in kinds.values()]
  ax.legend(handles, list(kinds), loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, fontsize=8, frameon=False)
  fig.tight_layout()
  fig.savefig(out, dpi=110)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])

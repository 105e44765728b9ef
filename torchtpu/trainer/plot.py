"""The trainer's loss-curve PNG, drawn by matplotlib.

loss_curve_png(path, steps, losses) plots the finite losses against their
steps (a line, with markers when there are few points), on a grid with
labelled axes, at width x height pixels, and writes an 8-bit RGB PNG
atomically. It draws on matplotlib's Agg canvas directly (no pyplot): no
global backend is chosen or changed, no display is needed, and threads do
not share state. The PNG is written by Pillow (matplotlib's own image
dependency) as RGB rather than savefig's RGBA: the plot has no transparency.
"""
import math
import os

LINE = "#1f5ac8"  # the curve's colour


def loss_curve_png(path, steps, losses, width=640, height=400):
    """Writes the curve losses(steps) to `path` (atomically); returns `path`."""
    import numpy as np
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image, PngImagePlugin

    pts = [(s, l) for s, l in zip(steps, losses) if math.isfinite(l)]
    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, color=LINE, linewidth=1.8, marker="o" if len(pts) <= 20 else None,
                markersize=3)
        if len(pts) == 1:
            ax.set_xlim(xs[0] - 1, xs[0] + 1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("training loss")
    ax.grid(True, color="#dddddd", linewidth=0.8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    canvas.draw()
    rgb = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", f"Matplotlib version{matplotlib.__version__}, "
                              f"https://matplotlib.org/")
    tmp = path + ".tmp"
    rgb.save(tmp, format="PNG", pnginfo=info)
    os.replace(tmp, path)
    return path

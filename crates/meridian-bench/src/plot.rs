//! Plots drawn by the tool itself, as PNG and SVG.

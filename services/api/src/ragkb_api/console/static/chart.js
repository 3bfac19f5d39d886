// A grouped bar chart in inline SVG (no chart library): one group per metric, one bar per run.
"use strict";

import { svg } from "./dom.js";

const COLOURS = ["#2f5bd3", "#e0872b", "#2a9d6f", "#9b59b6", "#c0392b", "#16a0b5"];
const WIDTH = 640;
const HEIGHT = 260;
const PAD = { top: 16, right: 16, bottom: 52, left: 44 };

// series: [{name, values: {metric: number}}]; metrics: the metric names, in order. Values are in 0..1.
export function barChart(title, metrics, series) {
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const groupW = plotW / Math.max(metrics.length, 1);
  const barW = Math.min(36, (groupW - 16) / Math.max(series.length, 1));
  const y = (value) => PAD.top + plotH * (1 - Math.max(0, Math.min(1, value)));
  const nodes = [svg("title", { text: title })];
  for (const tick of [0, 0.25, 0.5, 0.75, 1]) {
    nodes.push(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(tick), y2: y(tick), class: "grid-line" }));
    nodes.push(svg("text", { x: PAD.left - 6, y: y(tick) + 4, "text-anchor": "end", class: "axis", text: tick.toFixed(2) }));
  }
  metrics.forEach((metric, group) => {
    const start = PAD.left + group * groupW + (groupW - barW * series.length) / 2;
    series.forEach((run, index) => {
      const value = run.values[metric];
      if (value === undefined || value === null) return;
      const x = start + index * barW;
      nodes.push(svg("rect", { x: x + 2, y: y(value), width: barW - 4, height: Math.max(0, PAD.top + plotH - y(value)), fill: COLOURS[index % COLOURS.length], rx: 2 }, [
        svg("title", { text: run.name + " · " + metric + " = " + value.toFixed(4) }),
      ]));
      nodes.push(svg("text", { x: x + barW / 2, y: y(value) - 4, "text-anchor": "middle", class: "bar-label", text: value.toFixed(3) }));
    });
    nodes.push(svg("text", { x: PAD.left + group * groupW + groupW / 2, y: HEIGHT - PAD.bottom + 18, "text-anchor": "middle", class: "axis strong", text: metric }));
  });
  series.forEach((run, index) => {
    const x = PAD.left + index * 170;
    nodes.push(svg("rect", { x, y: HEIGHT - 18, width: 12, height: 12, fill: COLOURS[index % COLOURS.length], rx: 2 }));
    nodes.push(svg("text", { x: x + 18, y: HEIGHT - 8, class: "axis", text: run.name.length > 24 ? run.name.slice(0, 23) + "…" : run.name }));
  });
  return svg("svg", { viewBox: "0 0 " + WIDTH + " " + HEIGHT, class: "chart", role: "img", "aria-label": title }, nodes);
}

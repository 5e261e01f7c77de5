// The arithmetic of the run page's live tail (run/charts.js draws it): live points between plotly's draws go
// onto an SVG polyline over the plot area, placed with the axes plotly drew, until plotly takes them in.
import {flatRange} from "./smoothing.js";

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

// The x range of a chart whose run is `live`: its points and as much again as its last 100 took (at least 5%),
// so about 100 more points fit before plotly must draw the axis again; undefined (plotly's autorange) once the
// run has ended. A single x (one point, or all at one step) gets a padded range around it.
export function liveXRange(x, live) {
  if (x.length && x[0] === x[x.length - 1]) return flatRange([[x[0]]]);
  if (!live || x.length < 2) return undefined;
  const low = Math.min(x[0], x[x.length - 1]);
  const high = Math.max(x[0], x[x.length - 1]);
  const recent = x[x.length - 1] - x[Math.max(0, x.length - 101)];
  return high > low ? [low, high + Math.max(recent, 0.05 * (high - low))] : undefined;
}

// Whether the points from index `from` on lie within the axes plotly drew (`xRange`, `yRange`, in either order).
// `toLinearY` turns a value into the y axis's own coordinate (its log on a log axis). An axis the user zoomed
// (`zoomed.x`, `zoomed.y`) is not checked: the tail is cut at the plot area's edge there instead.
export function tailWithinAxes(x, values, from, {xRange, yRange, toLinearY = (value) => value,
                                                 zoomed = {x: false, y: false}}) {
  const [xLow, xHigh] = [...xRange].sort((a, b) => a - b);
  const [yLow, yHigh] = [...yRange].sort((a, b) => a - b);
  for (let index = from; index < values.length; index++) {
    const y = toLinearY(values[index]);
    if (!zoomed.x && (x[index] < xLow || x[index] > xHigh)) return false;
    if (!zoomed.y && !(y >= yLow && y <= yHigh)) return false;
  }
  return true;
}

// The polyline of a tail: from the last point plotly drew (index `drawn - 1`) to the newest, in pixels of the
// plot area ("x,y x,y ..."); gaps are left out.
export function tailPoints(x, values, drawn, xToPixel, yToPixel) {
  const points = [];
  for (let index = Math.max(0, drawn - 1); index < values.length; index++) {
    if (isNumber(values[index])) points.push(`${xToPixel(x[index]).toFixed(1)},${yToPixel(values[index]).toFixed(1)}`);
  }
  return points.join(" ");
}

// How long until plotly takes a chart's tail in: `interval` ms after its last draw (`plotlyAt`), at once if past.
export function untilPlotlyDraws(plotlyAt, interval, now) {
  return Math.max(0, plotlyAt + interval - now);
}

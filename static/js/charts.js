// The console's time-series charts, drawn with the vendored uPlot (static/vendor/uplot-*.js).
//
// Each chart card holds its data as JSON in its data-chart attribute (data, never run, so the
// Content-Security-Policy allows it; a <script type="application/json"> would not survive htmx's
// swaps, which drop scripts) beside a server-rendered SVG that stays when script is off. Here each card's SVG gives way to a uPlot chart with a time
// axis over the chart's window, hover values with units in its legend, zoom by dragging a range
// (double-click returns to the whole window), the latest values while the pointer is away, and
// round marks for isolated samples. uPlot styles
// through the CSSOM (element.style), which style-src does not restrict; nothing here writes
// markup with style attributes or <style> elements.
//
// The metrics page swaps its charts every 15 s (htmx); a zoomed chart keeps its range across a
// swap, and charts whose card left the page are destroyed.
(function () {
  "use strict";

  var HEIGHT = 180;
  var zoomed = {}; // data-chart-id -> {min, max} while that chart is zoomed in
  var mounted = []; // {plot, observer, root}

  var compact = new Intl.NumberFormat(undefined, { notation: "compact", maximumSignificantDigits: 3 });

  function number(v) {
    return v == null ? "\u2013" : compact.format(v);
  }

  function withUnit(v, unit) {
    if (v == null) return "\u2013";
    return unit === "%" ? number(v) + "%" : number(v) + " " + unit;
  }

  // The time column spans the chart's window: an empty row at each end of it (values null, a
  // gap to uPlot) unless a sample already sits there.
  function columns(payload) {
    var times = payload.times.slice();
    var values = payload.series.map(function (s) { return s.values.slice(); });
    if (payload.start != null && (!times.length || payload.start < times[0])) {
      times.unshift(payload.start);
      values.forEach(function (v) { v.unshift(null); });
    }
    if (payload.end != null && (!times.length || payload.end > times[times.length - 1])) {
      times.push(payload.end);
      values.forEach(function (v) { v.push(null); });
    }
    return [times].concat(values);
  }

  // A sample with no neighbour draws no line: show it as a point even where the line's other
  // samples are too dense for points.
  function isolated(u, si, show) {
    if (show) return null;
    var ys = u.data[si];
    var out = [];
    for (var i = 0; i < ys.length; i++) {
      if (ys[i] != null && (i === 0 || ys[i - 1] == null) && (i === ys.length - 1 || ys[i + 1] == null)) {
        out.push(i);
      }
    }
    return out;
  }

  // Scatter charts (the optimizer's Pareto front): numeric x, marks only, and the hovered
  // point's name in the legend's first column.
  function scatterOptions(payload, width) {
    var unit = payload.unit;
    var series = [{
      label: payload.x_unit,
      value: function (u, v, si, idx) {
        if (idx == null) return "\u2013";
        return withUnit(v, payload.x_unit) + " \u00b7 " + payload.labels[idx];
      },
    }];
    payload.series.forEach(function (s) {
      series.push({
        label: s.label,
        stroke: s.colour,
        fill: s.colour,
        paths: function () { return null; },
        points: { show: true, size: 9, fill: s.colour },
        value: function (u, v) { return withUnit(v, unit); },
      });
    });
    var axis = { stroke: "#667085", grid: { stroke: "#eef0f4" }, ticks: { stroke: "#eef0f4" } };
    return {
      width: width,
      height: HEIGHT,
      series: series,
      scales: {
        x: { time: false, range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } },
        y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } },
      },
      axes: [
        Object.assign({ label: payload.x_unit }, axis),
        Object.assign({ label: unit, size: 52 }, axis),
      ],
      cursor: { drag: { x: false, y: false } },
      legend: { live: true },
    };
  }

  function options(payload, width, id, rest) {
    if (payload.kind === "scatter") return scatterOptions(payload, width);
    var unit = payload.unit;
    var series = [{ label: "Time", value: "{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}" }];
    payload.series.forEach(function (s) {
      series.push({
        label: s.label,
        stroke: s.colour,
        width: 1.5,
        spanGaps: false,
        points: { size: 6, fill: s.colour, filter: isolated },
        value: function (u, v) { return withUnit(v, unit); },
      });
    });
    return {
      width: width,
      height: HEIGHT,
      series: series,
      // Rates, latencies and counts read against zero; an empty chart still has a scale.
      scales: {
        x: { time: true },
        y: {
          range: function (u, min, max) {
            if (min == null || max == null) return [0, 1];
            return [Math.min(0, min), max > 0 ? max * 1.1 : 1];
          },
        },
      },
      axes: [
        { stroke: "#667085", grid: { stroke: "#eef0f4" }, ticks: { stroke: "#eef0f4" } },
        {
          stroke: "#667085",
          size: 52,
          grid: { stroke: "#eef0f4" },
          ticks: { stroke: "#eef0f4" },
          values: function (u, splits) {
            return splits.map(function (v) { return unit === "%" ? number(v) + "%" : number(v); });
          },
        },
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
      hooks: {
        // Away from the plot the legend shows the latest sample rather than blanks.
        setLegend: [function (u) {
          if (u.legend.idx == null && rest != null) u.setLegend({ idx: rest }, false);
        }],
        setScale: [function (u, key) {
          if (key !== "x") return;
          var xs = u.data[0];
          var min = u.scales.x.min, max = u.scales.x.max;
          var whole = !xs.length || (min <= xs[0] && max >= xs[xs.length - 1]);
          zoomed[id] = whole ? null : { min: min, max: max };
          // The range shown, in Unix seconds, readable from the page (tests, tools).
          u.root.parentNode.setAttribute("data-x-min", String(min));
          u.root.parentNode.setAttribute("data-x-max", String(max));
        }],
      },
    };
  }

  function prune() {
    mounted = mounted.filter(function (m) {
      if (m.root.isConnected) return true;
      m.observer.disconnect();
      m.plot.destroy();
      return false;
    });
  }

  function mount(card) {
    var fallback = card.querySelector(".chart");
    if (!fallback || fallback.hasAttribute("data-drawn")) return;
    var payload = JSON.parse(card.getAttribute("data-chart"));
    var id = card.getAttribute("data-chart-id");
    // The host keeps the fallback's role and summary for screen readers; the SVG gives way.
    fallback.setAttribute("data-drawn", "");
    fallback.replaceChildren();
    fallback.classList.add("chart-live");
    var legend = card.querySelector("[data-chart-legend]");
    if (legend) legend.classList.add("visually-hidden"); // uPlot's legend shows the values
    var width = Math.max(200, fallback.clientWidth);
    var data = columns(payload);
    var rest = payload.times.length ? data[0].indexOf(payload.times[payload.times.length - 1]) : null;
    var plot = new window.uPlot(options(payload, width, id, rest), data, fallback);
    if (rest != null) plot.setLegend({ idx: rest }, false);
    var empty = payload.series.every(function (s) {
      return s.values.every(function (v) { return v == null; });
    });
    if (empty) {
      var note = document.createElement("span");
      note.className = "chart-empty";
      note.textContent = "no data in this window";
      fallback.appendChild(note);
    }
    var zoom = zoomed[id];
    if (zoom) plot.setScale("x", zoom);
    var observer = new ResizeObserver(function () {
      var w = Math.max(200, fallback.clientWidth);
      if (Math.abs(w - plot.width) > 1) plot.setSize({ width: w, height: HEIGHT });
    });
    observer.observe(fallback);
    mounted.push({ plot: plot, observer: observer, root: fallback });
  }

  function mountAll(root) {
    if (!window.uPlot) return; // the library failed to load: the SVG fallback stays
    prune();
    var scope = root && root.querySelectorAll ? root : document;
    if (scope.matches && scope.matches("figure[data-chart]")) mount(scope);
    scope.querySelectorAll("figure[data-chart]").forEach(mount);
  }

  document.addEventListener("DOMContentLoaded", function () { mountAll(document); });
  document.addEventListener("htmx:load", function (event) { mountAll(event.target); });
})();

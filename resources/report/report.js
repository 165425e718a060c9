// memsight report charts: SVG drawn from the JSON in #chart-data. No dependencies, no
// network. Drag across a chart to zoom every chart to that time range, double-click to zoom
// out, hover for the exact values. Sets data-state on #charts to "ok" or "error".
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var WIDTH = 1120, HEIGHT = 240, LEFT = 76, RIGHT = 16, TOP = 12, BOTTOM = 26;
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  var root = document.getElementById("charts");

  window.addEventListener("error", function () { root.setAttribute("data-state", "error"); });

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) { node.setAttribute(key, attrs[key]); }
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function text(parent, x, y, content, attrs) {
    var node = el("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    node.textContent = content;
    return node;
  }

  function formatBytes(value) {
    var size = value, unit = 0;
    while (Math.abs(size) >= 1024 && unit < UNITS.length - 1) { size /= 1024; unit += 1; }
    if (unit === 0) { return Math.round(size) + " B"; }
    return (Math.abs(size) < 100 ? size.toFixed(2) : size.toFixed(1)) + " " + UNITS[unit];
  }

  function formatSeconds(value, step) {
    if (step >= 1 || step === undefined) {
      if (value >= 120) {
        var m = Math.floor(value / 60), s = Math.round(value - 60 * m);
        return m + " min" + (s ? " " + s + " s" : "");
      }
      return (step === undefined ? value.toFixed(2) : String(Math.round(value))) + " s";
    }
    var digits = Math.min(4, Math.max(0, Math.ceil(-Math.log10(step))));
    return value.toFixed(digits) + " s";
  }

  function niceStep(span, count) {
    var raw = span / Math.max(count, 1);
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= raw) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function byteStep(max) {
    var unit = 1;
    while (max / unit >= 1024 && unit < Math.pow(1024, 4)) { unit *= 1024; }
    return niceStep(max / unit, 4) * unit;
  }

  // Index of the last t <= x (binary search); -1 before the first point.
  function lastAtOrBefore(ts, x) {
    var lo = 0, hi = ts.length - 1, found = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (ts[mid] <= x) { found = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return found;
  }

  function Chart(spec, data, view) {
    this.spec = spec;
    this.data = data;
    this.view = view;
    var box = document.createElement("div");
    box.className = "chart";
    box.id = "chart-" + spec.id;
    var title = document.createElement("div");
    title.className = "title";
    title.textContent = spec.title;
    box.appendChild(title);
    var legend = document.createElement("div");
    legend.className = "legend";
    spec.series.forEach(function (s) {
      var item = document.createElement("span");
      var swatch = document.createElement("i");
      swatch.style.background = s.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
    box.appendChild(legend);
    this.svg = el("svg", { viewBox: "0 0 " + WIDTH + " " + HEIGHT, role: "img",
                           "aria-label": spec.title }, box);
    this.readout = document.createElement("div");
    this.readout.className = "readout";
    box.appendChild(this.readout);
    root.appendChild(box);
    var ymax = 1;
    spec.series.forEach(function (s) { s.y.forEach(function (v) { if (v > ymax) { ymax = v; } }); });
    spec.limits.forEach(function (l) { if (l.y > ymax && l.y < 4 * ymax) { ymax = l.y; } });
    this.ymax = ymax * 1.08;
    this.bind();
  }

  Chart.prototype.x = function (t) {
    return LEFT + (t - this.view.t0) / (this.view.t1 - this.view.t0) * (WIDTH - LEFT - RIGHT);
  };
  Chart.prototype.y = function (v) {
    return TOP + (1 - v / this.ymax) * (HEIGHT - TOP - BOTTOM);
  };
  Chart.prototype.tAt = function (px) {
    return this.view.t0 + (px - LEFT) / (WIDTH - LEFT - RIGHT) * (this.view.t1 - this.view.t0);
  };

  Chart.prototype.draw = function () {
    var self = this, svg = this.svg, view = this.view;
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var clipId = "clip-" + this.spec.id;
    var clip = el("clipPath", { id: clipId }, el("defs", {}, svg));
    el("rect", { x: LEFT, y: 0, width: WIDTH - LEFT - RIGHT, height: HEIGHT - BOTTOM }, clip);
    var axis = el("g", { "class": "axis" }, svg);
    var ystep = byteStep(this.ymax);
    for (var v = 0; v <= this.ymax; v += ystep) {
      el("line", { "class": "grid", x1: LEFT, x2: WIDTH - RIGHT, y1: this.y(v), y2: this.y(v) }, axis);
      text(axis, LEFT - 6, this.y(v) + 4, formatBytes(v).replace(/\.0+ /, " "), { "text-anchor": "end" });
    }
    var span = view.t1 - view.t0;
    var tstep = span > 600 ? 60 * niceStep(span / 60, 8) : niceStep(span, 8);
    for (var t = Math.ceil(view.t0 / tstep) * tstep; t <= view.t1; t += tstep) {
      el("line", { "class": "grid", x1: this.x(t), x2: this.x(t), y1: HEIGHT - BOTTOM, y2: HEIGHT - BOTTOM + 4 }, axis);
      text(axis, this.x(t), HEIGHT - 8, formatSeconds(t, tstep), { "text-anchor": "middle" });
    }
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    this.data.findings.forEach(function (f) {
      if (f.plot && f.plot !== self.spec.plot) { return; }
      var x0 = self.x(f.start), x1 = Math.max(self.x(f.end), x0 + 2);
      el("rect", { "class": "band " + f.severity, x: x0, y: TOP, width: x1 - x0, height: HEIGHT - TOP - BOTTOM }, plot);
      text(plot, Math.max(x0, LEFT) + 3, TOP + 12, String(f.number), { "class": "band-label" });
    });
    var markers = this.data.markers;
    var visible = markers.iterations.filter(function (m) { return m >= view.t0 && m <= view.t1; });
    if (visible.length <= 400) {
      visible.forEach(function (m) {
        el("line", { "class": "iteration", x1: self.x(m), x2: self.x(m), y1: HEIGHT - BOTTOM - 5, y2: HEIGHT - BOTTOM }, plot);
      });
    }
    markers.epochs.forEach(function (m) {
      el("line", { "class": "epoch", x1: self.x(m), x2: self.x(m), y1: TOP, y2: HEIGHT - BOTTOM }, plot);
    });
    this.spec.limits.forEach(function (l) {
      if (l.y > self.ymax) { return; }
      el("line", { "class": "limit", x1: LEFT, x2: WIDTH - RIGHT, y1: self.y(l.y), y2: self.y(l.y) }, plot);
      text(plot, WIDTH - RIGHT - 4, self.y(l.y) - 4, l.label + " " + formatBytes(l.y),
           { "class": "limit-label", "text-anchor": "end" });
    });
    this.spec.series.forEach(function (s) {
      var first = Math.max(0, lastAtOrBefore(s.t, view.t0));
      var last = Math.min(s.t.length - 1, lastAtOrBefore(s.t, view.t1) + 1);
      var points = [];
      for (var i = first; i <= last; i++) {
        points.push(self.x(s.t[i]).toFixed(1) + "," + self.y(s.y[i]).toFixed(1));
      }
      var attrs = { "class": "series", points: points.join(" "), stroke: s.color };
      if (s.dash) { attrs["stroke-dasharray"] = "5 3"; }
      el("polyline", attrs, plot);
    });
    markers.events.forEach(function (e) {
      if (e.t < view.t0 || e.t > view.t1) { return; }
      el("line", { "class": "event " + e.kind, x1: self.x(e.t), x2: self.x(e.t), y1: TOP, y2: HEIGHT - BOTTOM }, plot);
      var right = self.x(e.t) > WIDTH / 2;
      text(plot, self.x(e.t) + (right ? -4 : 4), TOP + 26, e.label,
           { "class": "event-label " + e.kind, "text-anchor": right ? "end" : "start" });
    });
    this.cursor = el("line", { "class": "grid", x1: 0, x2: 0, y1: TOP, y2: HEIGHT - BOTTOM, visibility: "hidden" }, svg);
    this.selection = el("rect", { "class": "selection", x: 0, y: TOP, width: 0, height: HEIGHT - TOP - BOTTOM, visibility: "hidden" }, svg);
  };

  Chart.prototype.svgX = function (event) {
    var rect = this.svg.getBoundingClientRect();
    return (event.clientX - rect.left) / rect.width * WIDTH;
  };

  Chart.prototype.bind = function () {
    var self = this, dragFrom = null;
    this.svg.addEventListener("mousedown", function (event) {
      dragFrom = self.svgX(event);
      event.preventDefault();
    });
    this.svg.addEventListener("mousemove", function (event) {
      var x = self.svgX(event);
      if (dragFrom !== null) {
        self.selection.setAttribute("visibility", "visible");
        self.selection.setAttribute("x", Math.min(dragFrom, x));
        self.selection.setAttribute("width", Math.abs(x - dragFrom));
      }
      self.hover(x, event);
    });
    this.svg.addEventListener("mouseleave", function () {
      self.readout.style.display = "none";
      self.cursor.setAttribute("visibility", "hidden");
    });
    window.addEventListener("mouseup", function (event) {
      if (dragFrom === null) { return; }
      var x = self.svgX(event), from = dragFrom;
      dragFrom = null;
      self.selection.setAttribute("visibility", "hidden");
      if (Math.abs(x - from) > 4) {
        var a = self.tAt(Math.min(x, from)), b = self.tAt(Math.max(x, from));
        self.view.zoom(Math.max(a, 0), Math.min(b, self.data.duration));
      }
    });
    this.svg.addEventListener("dblclick", function () { self.view.zoom(0, self.data.duration); });
  };

  Chart.prototype.hover = function (x, event) {
    if (x < LEFT || x > WIDTH - RIGHT) { this.readout.style.display = "none"; return; }
    var t = this.tAt(x), lines = [formatSeconds(t)];
    this.spec.series.forEach(function (s) {
      var i = lastAtOrBefore(s.t, t);
      if (i >= 0) { lines.push(s.name + ": " + formatBytes(s.y[i])); }
    });
    this.readout.textContent = lines.join("  \u00b7  ");
    this.readout.style.display = "block";
    var box = this.svg.parentNode.getBoundingClientRect();
    var left = event.clientX - box.left + 12;
    this.readout.style.left = Math.min(left, box.width - this.readout.offsetWidth - 4) + "px";
    this.readout.style.top = (event.clientY - box.top + 12) + "px";
    this.cursor.setAttribute("x1", x);
    this.cursor.setAttribute("x2", x);
    this.cursor.setAttribute("visibility", "visible");
  };

  function main() {
    var data = JSON.parse(document.getElementById("chart-data").textContent);
    if (!data.charts.length) {
      var note = document.createElement("p");
      note.className = "note";
      note.textContent = "No samples were recorded.";
      root.appendChild(note);
      root.setAttribute("data-state", "ok");
      return;
    }
    var charts = [];
    var view = {
      t0: 0,
      t1: data.duration,
      zoom: function (a, b) {
        if (b - a < 1e-4) { return; }
        view.t0 = a; view.t1 = b;
        charts.forEach(function (c) { c.draw(); });
      }
    };
    data.charts.forEach(function (spec) { charts.push(new Chart(spec, data, view)); });
    view.zoom(0, data.duration);
    if (data.markers.iteration_every > 1) {
      var note = document.createElement("p");
      note.className = "note";
      note.textContent = "Iteration ticks: every " + data.markers.iteration_every + "th optimizer step.";
      root.appendChild(note);
    }
    root.setAttribute("data-state", "ok");
  }

  try {
    main();
  } catch (err) {
    root.setAttribute("data-state", "error");
    throw err;
  }
})();

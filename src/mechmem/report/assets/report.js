// mechmem report: draws the interactive views from the JSON blob in #mm-data. No library, no network.
// Views (one per <div class="view" data-view=... data-section=...>): "attention" (explorer), "heatmaps"
// (patching / ablation grids), "graph" (the edge circuit).
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("mm-data").textContent);
  // The SVG namespace, from the html parser itself (so the page holds no URL at all).
  var SVG = (function () {
    var probe = document.createElement("div");
    probe.innerHTML = "<svg></svg>";
    return probe.firstChild.namespaceURI;
  })();
  var tip = document.createElement("div");
  tip.className = "mm-tip";
  document.body.appendChild(tip);

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "n/a";
    var a = Math.abs(v);
    return a !== 0 && (a < 0.001 || a >= 1000) ? v.toExponential(2) : v.toFixed(3);
  }
  function interval(lo, hi) {
    return lo === null || lo === undefined || hi === null || hi === undefined
      ? "no interval" : "95% interval [" + fmt(lo) + ", " + fmt(hi) + "]";
  }
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = "block";
    var x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = ev.clientY + 14 + "px";
  }
  function hideTip() { tip.style.display = "none"; }
  // white -> blue for [0, 1] (attention); red <- white -> blue for signed values scaled by `scale`.
  function seq(v) {
    var t = Math.max(0, Math.min(1, v || 0));
    return "rgb(" + Math.round(255 - 222 * t) + "," + Math.round(255 - 177 * t) + "," + Math.round(255 - 75 * t) + ")";
  }
  function diverging(v, scale) {
    if (v === null || v === undefined) return "#ddd";
    var t = Math.max(-1, Math.min(1, v / (scale || 1)));
    var a = Math.abs(t);
    return t >= 0
      ? "rgb(" + Math.round(255 - 222 * a) + "," + Math.round(255 - 153 * a) + "," + Math.round(255 - 75 * a) + ")"
      : "rgb(" + Math.round(255 - 43 * a) + "," + Math.round(255 - 215 * a) + "," + Math.round(255 - 215 * a) + ")";
  }
  function select(label, options, onchange, cls) {
    var wrap = el("label", {}, label + " ");
    var s = el("select", { "class": cls });
    options.forEach(function (o, i) { s.appendChild(el("option", { value: String(i) }, o)); });
    s.addEventListener("change", function () { onchange(parseInt(s.value, 10)); });
    wrap.appendChild(s);
    return wrap;
  }

  // -- a grid of cells: rows x cols, colour(i, j), text(i, j) on hover, row/column labels
  // A grid drawn on a canvas (thousands of cells stay fast). Cells shrink to fit `opts.width` (down to 3 px);
  // labels too small to read are thinned out (the hover text always names the cell). The canvas carries its
  // geometry (data-left, data-top, data-size) so a test can point at a cell.
  function grid(rows, cols, colour, text, info, opts) {
    var longest = function (xs) { return Math.min(14, Math.max.apply(null, xs.map(function (x) { return String(x).length; }))); };
    var left = 8 + 7 * longest(rows), top = 8 + 6 * longest(cols);
    var room = Math.max(120, (opts.width || 560) - left - 4);
    var size = Math.max(3, Math.min(opts.maxCell || 26, Math.floor(room / Math.max(cols.length, 1))));
    var w = left + size * cols.length + 4, h = top + size * rows.length + 4;
    var ratio = window.devicePixelRatio || 1;
    var canvas = el("canvas", {
      "class": "grid", width: Math.round(w * ratio), height: Math.round(h * ratio),
      "data-left": left, "data-top": top, "data-size": size, role: "img"
    });
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    var fontSize = Math.max(8, Math.min(12, size - 1));
    var every = Math.max(1, Math.ceil(fontSize / size));
    ctx.font = fontSize + "px system-ui, sans-serif";
    ctx.fillStyle = "#222";
    ctx.textAlign = "right";
    rows.forEach(function (r, i) {
      if (i % every === 0) ctx.fillText(String(r), left - 4, top + size * i + size / 2 + fontSize / 3);
    });
    ctx.textAlign = "left";
    cols.forEach(function (c, j) {
      if (j % every) return;
      ctx.save();
      ctx.translate(left + size * j + size / 2 + fontSize / 3, top - 4);
      ctx.rotate(-Math.PI / 3);
      ctx.fillText(String(c), 0, 0);
      ctx.restore();
    });
    var gap = size > 5 ? 1 : 0;
    function fill(i, j) {
      ctx.fillStyle = colour(i, j);
      ctx.fillRect(left + size * j, top + size * i, size - gap, size - gap);
    }
    rows.forEach(function (_, i) { cols.forEach(function (_, j) { fill(i, j); }); });
    var last = null;
    function outline(cell) {
      if (last) fill(last[0], last[1]);
      last = cell;
      if (!cell) return;
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 1.5;
      ctx.strokeRect(left + size * cell[1] + 0.75, top + size * cell[0] + 0.75, size - gap - 1.5, size - gap - 1.5);
    }
    function cellAt(ev) {
      var box = canvas.getBoundingClientRect();
      var j = Math.floor((ev.clientX - box.left - left) / size), i = Math.floor((ev.clientY - box.top - top) / size);
      return i >= 0 && j >= 0 && i < rows.length && j < cols.length ? [i, j] : null;
    }
    canvas.addEventListener("mousemove", function (ev) {
      var cell = cellAt(ev);
      if (!cell) { hideTip(); outline(null); return; }
      var t = text(cell[0], cell[1]);
      info.textContent = t;
      showTip(ev, t);
      if (!last || last[0] !== cell[0] || last[1] !== cell[1]) outline(cell);
    });
    canvas.addEventListener("mouseleave", function () { hideTip(); outline(null); });
    return canvas;
  }

  // -- attention explorer
  function attention(view, d) {
    var state = { layer: 0, head: 0, example: 0 };
    var controls = el("div", { "class": "controls" });
    var headNames = function (layer) {
      var out = [];
      for (var h = 0; h < d.heads; h++) {
        var name = "L" + layer + "H" + h;
        out.push("H" + h + (d.roles[name] && d.roles[name] !== "none" ? " (" + d.roles[name] + ")" : ""));
      }
      return out;
    };
    var layers = [];
    for (var l = 0; l < d.layers; l++) layers.push("L" + l);
    controls.appendChild(select("layer", layers, function (v) { state.layer = v; fillHeads(); draw(); }, "mm-layer"));
    var headSel = select("head", headNames(0), function (v) { state.head = v; draw(); }, "mm-head");
    controls.appendChild(headSel);
    controls.appendChild(select("example", d.examples.map(function (e) { return e.label; }),
      function (v) { state.example = v; draw(); }, "mm-example"));
    function fillHeads() {
      var s = headSel.querySelector("select");
      s.innerHTML = "";
      headNames(state.layer).forEach(function (o, i) { s.appendChild(el("option", { value: String(i) }, o)); });
      s.value = String(state.head);
    }
    var title = el("h3", { "class": "mm-attn-title" });
    var info = el("div", { "class": "info mm-attn-info" }, "hover a cell: query -> key, attention weight");
    var holder = el("div", { "class": "mm-attn-grid" });
    view.appendChild(el("h3", {}, "Attention explorer"));
    view.appendChild(controls);
    view.appendChild(title);
    view.appendChild(holder);
    view.appendChild(info);
    view.appendChild(el("div", { "class": "legend" }, "Rows: query positions; columns: key positions (token names). " +
      "Colour: attention weight (white 0, dark blue 1). " + d.note));
    function draw() {
      var ex = d.examples[state.example];
      var pattern = ex.patterns[state.layer][state.head];
      var name = "L" + state.layer + "H" + state.head;
      title.textContent = name + (d.roles[name] ? ": " + d.roles[name] : "") + " on " + ex.label;
      var labels = ex.tokens.map(function (t, i) { return i + " " + t; });
      holder.innerHTML = "";
      holder.appendChild(grid(labels, labels, function (i, j) { return j > i ? "#f4f4f4" : seq(pattern[i][j]); },
        function (i, j) {
          return name + "  query " + i + " '" + ex.tokens[i] + "' -> key " + j + " '" + ex.tokens[j] + "': " +
            (j > i ? "masked (causal)" : fmt(pattern[i][j]));
        }, info, { width: Math.min(900, view.clientWidth - 24), maxCell: 24 }));
    }
    draw();
  }

  // -- heatmaps (patching sweeps, ablation deltas)
  function heatmaps(view, d) {
    view.appendChild(el("h3", {}, d.title));
    if (d.note) view.appendChild(el("div", { "class": "legend" }, d.note));
    var info = el("div", { "class": "info mm-heat-info" }, "hover a cell: value and interval");
    var maps = el("div", { "class": "maps" });
    d.maps.forEach(function (m, k) {
      var box = el("div", { "class": "map", "data-map": m.name });
      box.appendChild(el("div", { "class": "title" }, m.name + " (" + m.axes.join(" x ") + ")"));
      if (m.note) box.appendChild(el("div", { "class": "note" }, m.note));
      var colourBy = m.normalised || m.values;
      var scale = 0;
      colourBy.forEach(function (row) { row.forEach(function (v) { if (v !== null) scale = Math.max(scale, Math.abs(v)); }); });
      if (m.normalised) scale = Math.max(scale, 1);
      box.appendChild(grid(m.rows, m.cols, function (i, j) { return diverging(colourBy[i][j], scale); },
        function (i, j) {
          var t = m.name + "  " + m.rows[i] + ", " + m.cols[j] + ": " + m.value_label + " " + fmt(m.values[i][j]);
          if (m.normalised) t += " (restored " + fmt(m.normalised[i][j]) + ")";
          return t + "; " + (m.lower ? interval(m.lower[i][j], m.upper[i][j]) : "no interval");
        }, info, { width: m.cols.length > 24 || d.maps.length === 1 ? view.clientWidth - 24 : 520, maxCell: 30 }));
      maps.appendChild(box);
    });
    view.appendChild(maps);
    view.appendChild(info);
    view.appendChild(el("div", { "class": "legend" }, "Colour: blue = " + d.positive + ", red = the opposite; white = 0."));
  }

  // -- the edge circuit
  function graph(view, d) {
    var state = { all: false, selected: null };
    view.appendChild(el("h3", {}, "Circuit graph"));
    var controls = el("div", { "class": "controls" });
    var box = el("input", { type: "checkbox", "class": "mm-all-edges" });
    var lab = el("label", {}, " show the edges outside the circuit too");
    lab.insertBefore(box, lab.firstChild);
    controls.appendChild(lab);
    view.appendChild(controls);
    var holder = el("div", { "class": "mm-graph" });
    var panel = el("div", { "class": "edge-panel info mm-edge-info" }, "select an edge (click it) to see its evidence");
    view.appendChild(holder);
    view.appendChild(panel);
    view.appendChild(el("div", { "class": "legend" },
      "Edge colour: blue = positive score (the edge supports the clean answer), red = negative; width and " +
      "opacity grow with |score|; dashed = not in the circuit. Nodes: q, k, v are a head's inputs."));
    box.addEventListener("change", function () { state.all = box.checked; draw(); });
    var byName = {};
    d.nodes.forEach(function (n) { byName[n.name] = n; });
    function draw() {
      holder.innerHTML = "";
      var edges = d.edges.filter(function (e) { return state.all || e.kept; });
      var used = {};
      edges.forEach(function (e) { used[e.sender] = 1; used[e.receiver] = 1; });
      var nodes = d.nodes.filter(function (n) { return used[n.name] || n.kind === "head" || n.kind === "logits"; });
      var xs = nodes.map(function (n) { return n.x; }), ys = nodes.map(function (n) { return n.y; });
      var x0 = Math.min.apply(null, xs) - 0.9, x1 = Math.max.apply(null, xs) + 0.9;
      var y0 = Math.min.apply(null, ys) - 0.6, y1 = Math.max.apply(null, ys) + 0.6;
      var W = Math.min(1100, Math.max(420, 170 * (x1 - x0))), H = Math.max(260, 150 * (y1 - y0));
      var px = function (x) { return ((x - x0) / (x1 - x0)) * W; };
      var py = function (y) { return H - ((y - y0) / (y1 - y0)) * H; };
      var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "mm-graph-svg" });
      root.appendChild(svg("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }));
      var top = 0;
      edges.forEach(function (e) { top = Math.max(top, Math.abs(e.score || 0)); });
      var nodeEls = {};
      edges.forEach(function (e) {
        var s = byName[e.sender], r = byName[e.receiver];
        var ax = px(s.x), ay = py(s.y) - 14;
        var bx = px(r.x + (d.port_offset[e.port] || 0)), by = py(r.y) + (e.port === "in" ? 14 : 26);
        var mx = (ax + bx) / 2 + (by - ay) * 0.08, my = (ay + by) / 2;
        var path = "M" + ax + "," + ay + " Q" + mx + "," + my + " " + bx + "," + by;
        var frac = top ? Math.abs(e.score || 0) / top : 0;
        var line = svg("path", {
          d: path, "class": "edge", fill: "none", stroke: (e.score || 0) >= 0 ? "#2160c4" : "#d1342f",
          "stroke-width": 1.5 + 9 * frac, opacity: 0.35 + 0.6 * frac, "data-edge": e.name,
          "stroke-dasharray": e.kept ? "" : "6 4", "marker-end": ""
        });
        var hit = svg("path", {
          d: path, "class": "edge-hit", "stroke-width": 14, "data-edge": e.name, tabindex: 0, "aria-label": e.name
        });
        hit.addEventListener("click", function () { pick(e); });
        hit.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") pick(e); });
        hit.addEventListener("mousemove", function (ev) { showTip(ev, e.name + ": score " + fmt(e.score)); });
        hit.addEventListener("mouseleave", hideTip);
        root.appendChild(line);
        root.appendChild(hit);
      });
      nodes.forEach(function (n) {
        var g = svg("g", { "class": "node", "data-node": n.name });
        var label = n.name, role = n.role && n.role !== "none" ? n.role : "";
        var w = Math.max(54, 8.5 * Math.max(label.length, role.length) + 16), h = role ? 38 : 26;
        var cx = px(n.x), cy = py(n.y);
        g.appendChild(svg("rect", {
          x: cx - w / 2, y: cy - h / 2, width: w, height: h, rx: 7,
          fill: used[n.name] ? "#fde9a9" : "#eeeeee", stroke: "#777", "stroke-width": 1
        }));
        g.appendChild(svg("text", { x: cx, y: cy + (role ? -3 : 5), "text-anchor": "middle", "font-size": 14, "font-weight": 600 }, label));
        if (role) g.appendChild(svg("text", { x: cx, y: cy + 13, "text-anchor": "middle", "font-size": 12, fill: "#444" }, role));
        if (n.kind === "head") {
          ["q", "k", "v"].forEach(function (p) {
            var x = px(n.x + d.port_offset[p]);
            g.appendChild(svg("circle", { cx: x, cy: cy + 26, r: 3.5, fill: "#555" }));
            g.appendChild(svg("text", { x: x + 5, y: cy + 38, "font-size": 12, fill: "#333" }, p));
          });
        }
        nodeEls[n.name] = g;
        root.appendChild(g);
      });
      holder.appendChild(root);
      if (state.selected) pick(state.selected);
    }
    function pick(e) {
      state.selected = e;
      holder.querySelectorAll(".edge").forEach(function (p) {
        p.classList.toggle("selected", p.getAttribute("data-edge") === e.name);
      });
      holder.querySelectorAll(".node").forEach(function (g) {
        var name = g.getAttribute("data-node");
        g.classList.toggle("selected", name === e.sender || name === e.receiver);
      });
      var rows = [
        ["edge", e.name],
        ["joins", e.sender + " (" + (byName[e.sender].role || byName[e.sender].kind) + ") -> " + e.receiver +
          (e.port === "in" ? "" : " input " + e.port) + " (" + (byName[e.receiver].role || byName[e.receiver].kind) + ")"],
        ["score", fmt(e.score) + " (" + d.score_meaning + ")"],
        ["interval", interval(e.lower, e.upper) + (e.stderr !== null && e.stderr !== undefined ? "; stderr " + fmt(e.stderr) : "")],
        ["exact", e.exact ? "yes (path patching)" : "no (estimate: " + d.method + ")"],
        ["in circuit", e.kept ? "yes" : "no"]
      ];
      if (e.attribution !== undefined && e.attribution !== null) rows.push(["EAP estimate", fmt(e.attribution)]);
      var t = el("table", { "class": "mm-edge-table" });
      rows.forEach(function (r) {
        var tr = el("tr");
        tr.appendChild(el("th", {}, r[0]));
        tr.appendChild(el("td", { style: "text-align:left" }, r[1]));
        t.appendChild(tr);
      });
      panel.innerHTML = "";
      panel.appendChild(t);
    }
    draw();
  }

  var VIEWS = { attention: attention, heatmaps: heatmaps, graph: graph };
  document.querySelectorAll(".view").forEach(function (view) {
    var section = DATA[view.getAttribute("data-section")] || {};
    var kind = view.getAttribute("data-view");
    if (VIEWS[kind] && section[kind]) VIEWS[kind](view, section[kind]);
  });
  var toggle = document.getElementById("mm-toggle");
  if (toggle) {
    toggle.addEventListener("click", function () {
      var open = toggle.textContent === "expand all";
      document.querySelectorAll("details.section").forEach(function (d) { d.open = open; });
      toggle.textContent = open ? "collapse all" : "expand all";
    });
  }
  document.documentElement.setAttribute("data-mm-ready", "1");
})();

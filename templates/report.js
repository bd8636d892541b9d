/* groundlens report: sort, filter, page and expand the steps table. Data reaches the DOM through
   textContent only; the rows are rendered once by the server (the first page in the table, the rest
   in an inert <template>) and are only moved here, one page at a time. */
(function () {
  "use strict";
  var t0 = performance.now();
  var BAND_RANK = { error: 0, flagged: 1, review: 2, trusted: 3, skipped: 4 };
  var DEFAULT_DIR = { rank: 1, band: 1, score: 1, node: 1, trace: 1, latency: -1, index: 1 };
  var $ = function (id) { return document.getElementById(id); };

  var DATA = JSON.parse($("gl-data").textContent || "{\"steps\":[]}");
  var tbody = $("gl-rows");
  var table = $("gl-table");
  var ncols = table.tHead.rows[0].cells.length;
  var more = $("gl-more");
  var rowEls = Array.prototype.slice.call(tbody.rows);
  if (more && more.content) rowEls = rowEls.concat(Array.prototype.slice.call(more.content.querySelectorAll("tr.gl-row")));
  var items = rowEls.map(function (tr) {
    var d = tr.dataset;
    return {
      tr: tr, i: +d.rank - 1, rank: +d.rank, band: d.band, method: d.method, node: d.node, trace: d.trace || "",
      score: d.score === "" ? null : +d.score, latency: d.latency === "" ? null : +d.latency, index: +d.index,
      detail: null, open: false, hay: null
    };
  });
  var matched = items.slice();   // the steps that pass the filters, in table order
  var page = 0;
  var pageSize = +$("gl-page-size").value;  // 0: all
  var sortState = { key: "rank", dir: 1 };
  var timings = { init: 0, lastSort: 0, lastFilter: 0, lastRender: 0 };
  window.__glTimings = timings;

  // ------------------------------------------------------------ paging: only one page is in the DOM

  function render() {
    var s = performance.now();
    var pages = pageSize ? Math.max(1, Math.ceil(matched.length / pageSize)) : 1;
    if (page >= pages) page = pages - 1;
    var start = pageSize ? page * pageSize : 0;
    var end = pageSize ? Math.min(matched.length, start + pageSize) : matched.length;
    var frag = document.createDocumentFragment();
    for (var k = start; k < end; k++) {
      var it = matched[k];
      frag.appendChild(it.tr);
      if (it.detail && it.open) frag.appendChild(it.detail);
    }
    while (tbody.lastChild) tbody.removeChild(tbody.lastChild);
    tbody.appendChild(frag);
    $("gl-page").textContent = (matched.length ? start + 1 : 0) + "\u2013" + end + " of " + matched.length;
    $("gl-prev").disabled = page <= 0;
    $("gl-next").disabled = end >= matched.length;
    var shown = $("gl-shown");
    shown.textContent = matched.length + " of " + items.length + " match";
    shown.setAttribute("data-matched", String(matched.length));
    $("gl-none").hidden = matched.length > 0 || items.length === 0;
    timings.lastRender = performance.now() - s;
  }

  $("gl-prev").addEventListener("click", function () { page = Math.max(0, page - 1); render(); });
  $("gl-next").addEventListener("click", function () { page += 1; render(); });
  $("gl-page-size").addEventListener("change", function () { pageSize = +this.value; page = 0; render(); });

  // ------------------------------------------------------------ sorting

  function value(item, key) {
    if (key === "band") return BAND_RANK[item.band];
    return item[key];
  }

  function compare(a, b) {
    var key = sortState.key, dir = sortState.dir;
    var va = value(a, key), vb = value(b, key);
    if (va === null || va === undefined) return (vb === null || vb === undefined) ? a.rank - b.rank : 1;
    if (vb === null || vb === undefined) return -1;
    if (va < vb) return -dir;
    if (va > vb) return dir;
    return a.rank - b.rank;
  }

  function sortBy(key, dir) {
    var s = performance.now();
    sortState = { key: key, dir: dir };
    items.sort(compare);
    matched.sort(compare);
    page = 0;
    render();
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      if (!th.dataset.sort) return;
      th.setAttribute("aria-sort", th.dataset.sort === key ? (dir > 0 ? "ascending" : "descending") : "none");
    });
    timings.lastSort = performance.now() - s;
  }

  table.tHead.addEventListener("click", function (ev) {
    var th = ev.target.closest("th[data-sort]");
    if (!th) return;
    var key = th.dataset.sort;
    var dir = sortState.key === key ? -sortState.dir : DEFAULT_DIR[key] || 1;
    sortBy(key, dir);
  });

  // ------------------------------------------------------------ filters

  var form = $("gl-filters");
  var bandBoxes = Array.prototype.slice.call(form.querySelectorAll("input[name=band]"));
  var nodeSel = $("gl-f-node"), methodSel = $("gl-f-method"), traceSel = $("gl-f-trace"), textBox = $("gl-f-text");

  function haystack(it) {
    if (it.hay === null) {
      var s = DATA.steps[it.i] || {};
      var parts = [it.node, it.trace, s.q || "", s.r || "", s.err || "", s.skip || ""];
      (s.ctx || []).forEach(function (c) { parts.push(c[0], c[1]); });
      it.hay = parts.join("\n").toLowerCase();
    }
    return it.hay;
  }

  function applyFilters() {
    var s = performance.now();
    var bands = {};
    bandBoxes.forEach(function (b) { bands[b.value] = b.checked; });
    var node = nodeSel.value, method = methodSel.value, trace = traceSel ? traceSel.value : "";
    var text = textBox.value.trim().toLowerCase();
    matched = items.filter(function (it) {
      return bands[it.band] && (!node || it.node === node) && (!method || it.method === method) &&
        (!trace || it.trace === trace) && (!text || haystack(it).indexOf(text) >= 0);
    });
    page = 0;
    render();
    timings.lastFilter = performance.now() - s;
  }

  form.addEventListener("change", applyFilters);
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  var typing = null;
  textBox.addEventListener("input", function () {
    clearTimeout(typing);
    typing = setTimeout(applyFilters, 120);
  });

  function resetFilters() {
    bandBoxes.forEach(function (b) { b.checked = true; });
    nodeSel.value = ""; methodSel.value = ""; textBox.value = "";
    if (traceSel) traceSel.value = "";
  }
  $("gl-reset").addEventListener("click", function () { resetFilters(); applyFilters(); });

  function showTable() {
    var target = $("gl-h-steps");
    if (target && target.scrollIntoView) target.scrollIntoView({ block: "start" });
  }

  document.addEventListener("click", function (ev) {
    var el = ev.target.closest("[data-filter-band],[data-filter-method],[data-filter-node],[data-filter-trace]");
    if (!el) return;
    resetFilters();
    var d = el.dataset;
    if (d.filterBand && d.filterBand !== "all") {
      bandBoxes.forEach(function (b) { b.checked = b.value === d.filterBand; });
    }
    if (d.filterMethod) methodSel.value = d.filterMethod;
    if (d.filterNode !== undefined) nodeSel.value = d.filterNode;
    if (d.filterTrace !== undefined && traceSel) traceSel.value = d.filterTrace;
    applyFilters();
    if (!el.classList.contains("gl-card")) showTable();
  });

  // ------------------------------------------------------------ details, built on first expand

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function textBlock(title, text, note, cls) {
    var box = el("div", "gl-block " + (cls || ""));
    var h = el("h4", null, title);
    if (note) { h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "gl-pill", note)); }
    box.appendChild(h);
    box.appendChild(el("pre", "gl-text", text === "" ? "(empty)" : text));
    return box;
  }

  // the response, each sentence tinted by its support, unsupported tokens marked; hover a sentence
  // for its best passage, and the list below it shows every sentence's evidence
  function supportClass(v) { return v > 0.95 ? "gl-sup-hi" : (v >= 0.8 ? "gl-sup-mid" : "gl-sup-lo"); }

  function evidenceBlock(s) {
    var text = s.r || "";
    var box = el("div", "gl-block gl-block-resp");
    var h = el("h4", null, "Response");
    if (s.rn) { h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "gl-pill", s.rn)); }
    h.appendChild(document.createTextNode(" "));
    h.appendChild(el("span", "gl-legend", "each sentence tinted by support (share of its content words found in the context); marked words are not in the context"));
    box.appendChild(h);
    var pre = el("pre", "gl-text gl-resp-ev");
    var pos = 0;
    var list = el("ol", "gl-evidence");
    s.ev.forEach(function (e, k) {
      if (e[0] > pos) pre.appendChild(document.createTextNode(text.slice(pos, e[0])));
      var span = el("span", "gl-sent " + supportClass(e[2]) + (e[6] ? " gl-weakest" : ""));
      span.dataset.support = String(e[2]);
      span.title = "support " + e[2].toFixed(2) + (e[6] ? " (weakest sentence)" : "") +
        "\nbest passage (similarity " + e[3].toFixed(2) + "): " + e[4];
      var p = e[0];
      e[5].forEach(function (u) {
        if (u[0] > p) span.appendChild(document.createTextNode(text.slice(p, u[0])));
        span.appendChild(el("mark", "gl-unsup", text.slice(u[0], u[1])));
        p = u[1];
      });
      if (e[1] > p) span.appendChild(document.createTextNode(text.slice(p, e[1])));
      pre.appendChild(span);
      pos = e[1];
      var li = el("li", "gl-ev " + supportClass(e[2]) + (e[6] ? " gl-weakest" : ""));
      li.appendChild(el("span", "gl-ev-sup", "support " + e[2].toFixed(2) + (e[6] ? " \u2190 weakest" : "")));
      li.appendChild(el("span", "gl-ev-sent", text.slice(e[0], e[1])));
      li.appendChild(el("span", "gl-ev-pass", "best passage (similarity " + e[3].toFixed(2) + "): " + e[4]));
      list.appendChild(li);
    });
    if (pos < text.length) pre.appendChild(document.createTextNode(text.slice(pos)));
    box.appendChild(pre);
    var det = el("details", "gl-ev-details");
    det.appendChild(el("summary", null, "Evidence for each sentence (" + s.ev.length + ")"));
    det.appendChild(list);
    box.appendChild(det);
    return box;
  }

  function buildDetail(it) {
    var s = DATA.steps[it.i] || {};
    var tr = el("tr", "gl-detail");
    var td = el("td");
    td.colSpan = ncols;
    var wrap = el("div", "gl-detail-grid");
    var main = el("div", "gl-detail-main");
    var side = el("div", "gl-detail-side");

    if (s.err) main.appendChild(textBlock("Error", s.err, "", "gl-block-error"));
    if (s.skip) main.appendChild(textBlock("Skipped", s.skip, "", "gl-block-skip"));
    if (s.ex) main.appendChild(textBlock("Explanation", s.ex, "", "gl-block-ex"));
    main.appendChild(textBlock("Question", s.q || "", s.qn));
    var ctx = s.ctx || [];
    var cbox = el("div", "gl-block");
    cbox.appendChild(el("h4", null, "Context (" + ctx.length + (ctx.length === 1 ? " piece)" : " pieces)")));
    if (!ctx.length) cbox.appendChild(el("p", "gl-none", "No context: scored with DGI, or not scored."));
    ctx.forEach(function (c) {
      var piece = el("div", "gl-ctx");
      var head = el("div", "gl-ctx-src");
      head.appendChild(el("span", "gl-src", c[0] || "context"));
      if (c[2]) { head.appendChild(document.createTextNode(" ")); head.appendChild(el("span", "gl-pill", c[2])); }
      piece.appendChild(head);
      piece.appendChild(el("pre", "gl-text", c[1]));
      cbox.appendChild(piece);
    });
    main.appendChild(cbox);
    if (s.ev && s.ev.length) main.appendChild(evidenceBlock(s)); else main.appendChild(textBlock("Response", s.r || "", s.rn));

    var dl = el("dl", "gl-facts");
    (s.facts || []).forEach(function (f) {
      dl.appendChild(el("dt", null, f[0]));
      dl.appendChild(el("dd", null, f[1]));
    });
    side.appendChild(el("h4", null, "Details"));
    side.appendChild(dl);
    if (s.meta) side.appendChild(textBlock("Metadata", s.meta, "", "gl-block-meta"));

    wrap.appendChild(main);
    wrap.appendChild(side);
    td.appendChild(wrap);
    tr.appendChild(td);
    return tr;
  }

  function toggle(it) {
    it.open = !it.open;
    if (it.open && !it.detail) {
      it.detail = buildDetail(it);
      it.tr.parentNode.insertBefore(it.detail, it.tr.nextSibling);
    }
    if (it.detail) it.detail.hidden = !it.open;
    it.tr.classList.toggle("gl-open", it.open);
    it.tr.querySelector(".gl-toggle").setAttribute("aria-expanded", it.open ? "true" : "false");
  }

  var byRow = new Map();
  items.forEach(function (it) { byRow.set(it.tr, it); });
  tbody.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.gl-row");
    if (!tr || !byRow.has(tr)) return;
    var sel = window.getSelection && window.getSelection();
    if (sel && String(sel) && !ev.target.closest(".gl-toggle")) return; // selecting text, not expanding
    toggle(byRow.get(tr));
  });

  timings.init = performance.now() - t0;
  document.documentElement.setAttribute("data-gl-ready", "1");
})();

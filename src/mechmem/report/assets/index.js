// mechmem index: sort the table by a column when its header is clicked (again: the other way).
(function () {
  "use strict";
  var table = document.getElementById("index");
  if (!table) return;
  var heads = table.tHead.rows[0].cells;
  function key(row, col) {
    var cell = row.cells[col];
    var num = cell.getAttribute("data-sort");
    if (num !== null) return parseFloat(num);
    return cell.textContent.trim().toLowerCase();
  }
  function sortBy(col) {
    var th = heads[col];
    var asc = !th.classList.contains("sorted-asc");
    Array.prototype.forEach.call(heads, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(asc ? "sorted-asc" : "sorted-desc");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a, col), y = key(b, col);
      var missingX = x === "n/a" || x === "", missingY = y === "n/a" || y === "";
      if (missingX !== missingY) return missingX ? 1 : -1;  // rows without a value last, either way
      if (x < y) return asc ? -1 : 1;
      if (x > y) return asc ? 1 : -1;
      return 0;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  Array.prototype.forEach.call(heads, function (th, i) {
    th.addEventListener("click", function () { sortBy(i); });
    th.addEventListener("keydown", function (ev) { if (ev.key === "Enter") sortBy(i); });
  });
})();

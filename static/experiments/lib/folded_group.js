// A folded group of charts (a <details> holding `list`), such as the System group (trainer/system_metrics.py) of the
// run and compare pages. A chart drawn while its group was folded has no width to draw at: plotly sizes the
// group's charts when it opens. The caller places the group and fills `list` with chart cards.

export function foldedGroup(id, summaryHtml, list) {
  const group = document.createElement("details");
  group.id = id;
  group.className = "chart-group";
  const summary = document.createElement("summary");
  summary.innerHTML = summaryHtml;
  group.append(summary, list);
  group.addEventListener("toggle", () => {
    if (group.open) list.querySelectorAll(".chart").forEach((element) => { if (element.data) Plotly.Plots.resize(element); });
  });
  return group;
}

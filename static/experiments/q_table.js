// The Q-table of a tabular run as a heatmap: the best Q-value of each state, its greedy action on hover.
// Drawn from the latest checkpoint (/runs/<id>/q-table.json); "Refresh" reads the newest one again.
const section = document.getElementById("q-table");  // run_detail.html has it for tabular runs
const chart = document.getElementById("q-table-chart");
const note = document.getElementById("q-table-note");

async function draw() {
  note.hidden = false;
  note.textContent = "Loading the table from the latest checkpoint…";
  let table;
  try {
    const response = await fetch(section.dataset.url, {headers: {Accept: "application/json"}});
    table = await response.json();
    if (!response.ok) throw new Error(table.error || response.statusText);
  } catch (error) {
    note.textContent = error.message;
    return;
  }
  const gridWorld = table.x_title === "column";
  const text = table.actions.map((row) => row.map((action) => (action === null ? "never visited" : `greedy action ${action}`)));
  Plotly.react(chart, [{
    type: "heatmap", x: table.x, y: table.y, z: table.values, text: text, colorscale: "Viridis",
    hovertemplate: `${table.x_title || "x"} %{x}, ${table.y_title || "y"} %{y}<br>max Q %{z:.4g}<br>%{text}<extra></extra>`,
    colorbar: {title: {text: "max Q"}},
  }], {
    margin: {l: 60, r: 20, t: 10, b: 50},
    // a grid world (rows and columns) is drawn as the map looks: row 0 on top, one tick per cell
    xaxis: {title: {text: table.x_title}, dtick: gridWorld ? 1 : undefined},
    yaxis: {title: {text: table.y_title}, autorange: gridWorld ? "reversed" : true, dtick: gridWorld ? 1 : undefined},
  }, {responsive: true, displaylogo: false});
  note.textContent = `From the ${table.tag} checkpoint at step ${table.step}. Blank cells were never updated.`;
}

if (section) {
  document.getElementById("q-table-refresh").addEventListener("click", draw);
  draw();
}

// The lists of runs and experiments (the experiment list, an experiment's runs, the run list) while some of their
// runs are queued or running: every few seconds, while the tab is shown, the table's rows are drawn again from the
// page itself, so statuses, progress, time left and returns move without a reload. Ticked boxes stay ticked. It
// stops once no row is active (`data-active`, set by the server).
import {drawnNow} from "./drawn_now.js";

const table = document.querySelector("table[data-live-rows]");
const intervalMs = 5000;

function active(rows) {
  return rows.querySelector("tr[data-active]") !== null;
}

async function drawAgain() {
  const drawn = await drawnNow(table.id);
  if (!drawn) return;
  const rows = drawn.tBodies[0];
  // the boxes as they are now, not as the request left: one ticked while it was on its way stays ticked
  const ticked = [...table.querySelectorAll("input[type=checkbox]:checked")].map((box) => `${box.name}=${box.value}`);
  rows.querySelectorAll("input[type=checkbox]").forEach((box) => {
    if (ticked.includes(`${box.name}=${box.value}`)) box.checked = true;
  });
  table.tBodies[0].replaceWith(rows);
}

async function follow() {
  if (document.visibilityState === "visible") {
    try {
      await drawAgain();
    } catch {
      // the site is out of reach for now: the rows stay as they are until the next try
    }
  }
  if (active(table.tBodies[0])) setTimeout(follow, intervalMs);
}

if (table && active(table.tBodies[0])) setTimeout(follow, intervalMs);

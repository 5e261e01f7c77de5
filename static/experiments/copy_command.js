// The run page's "Copy" button: puts the command that trains the run again on the clipboard. The clipboard API needs
// a secure page (https or localhost); elsewhere the command is selected, for Ctrl-C. The Environment card holding
// the button may be drawn again while the page is open (run/details.js), so the click is taken on the document.
function selectCommand(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

document.addEventListener("click", async (click) => {
  const button = click.target.closest("#copy-command");
  if (!button) return;
  const command = document.getElementById(button.dataset.copy);
  const status = document.getElementById("copy-command-status");
  try {
    await navigator.clipboard.writeText(command.textContent);
    status.textContent = "Copied";
  } catch {
    selectCommand(command);
    status.textContent = "Selected: press Ctrl-C (or ⌘-C) to copy";
  }
});

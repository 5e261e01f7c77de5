// The run page's "Copy" button: puts the command that trains the run again on the clipboard. The clipboard API needs
// a secure page (https or localhost); elsewhere the command is selected, for Ctrl-C.
const button = document.getElementById("copy-command");
const status = document.getElementById("copy-command-status");

function selectCommand(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

button?.addEventListener("click", async () => {
  const command = document.getElementById(button.dataset.copy);
  try {
    await navigator.clipboard.writeText(command.textContent);
    status.textContent = "Copied";
  } catch {
    selectCommand(command);
    status.textContent = "Selected: press Ctrl-C (or ⌘-C) to copy";
  }
});

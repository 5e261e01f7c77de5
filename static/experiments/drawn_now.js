// A part of the page as the server draws it now: the page fetched again and its element of that id, or null when
// the answer is not a page or lacks it. For parts that only the server draws and that change while the page is open
// (the run page's Environment card, the lists' rows).
export async function drawnNow(id, url = window.location.href) {
  const response = await fetch(url, {headers: {Accept: "text/html"}});
  if (!response.ok) return null;
  return new DOMParser().parseFromString(await response.text(), "text/html").getElementById(id);
}

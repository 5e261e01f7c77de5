// The run page keeps a chart's live points in memory: past a limit, a series keeps the smallest and the largest
// point of each 4, in their order, so extremes stay and the count shrinks.

// `columns`: equally long arrays by name (step, time, value, and the band's low and high); `by`: the column whose
// extremes are kept. Returns new arrays by the same names; the ones given are left as they are.
export function keepExtremes(columns, by = "value", group = 4) {
  const names = Object.keys(columns);
  const values = columns[by];
  const kept = Object.fromEntries(names.map((name) => [name, []]));
  for (let start = 0; start < values.length; start += group) {
    const end = Math.min(start + group, values.length);
    let smallest = start;
    let largest = start;
    for (let index = start + 1; index < end; index++) {
      if (values[index] < values[smallest]) smallest = index;
      if (values[index] > values[largest]) largest = index;
    }
    for (const index of smallest === largest ? [smallest] : [Math.min(smallest, largest), Math.max(smallest, largest)]) {
      for (const name of names) kept[name].push(columns[name][index]);
    }
  }
  return kept;
}

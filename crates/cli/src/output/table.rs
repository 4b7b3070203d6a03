//! Aligned text tables.

use crate::style::Style;

/// Which columns hold states (coloured) and which are right-aligned (numbers and sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// Left-aligned text.
    Text,
    /// Right-aligned numbers or sizes.
    Number,
    /// Left-aligned state name, coloured on a terminal.
    State,
}

/// A table: a header row and data rows, printed with two spaces between columns.
pub struct Table {
    headers: Vec<&'static str>,
    kinds: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&'static str, Column)]) -> Table {
        Table {
            headers: columns.iter().map(|(name, _)| *name).collect(),
            kinds: columns.iter().map(|(_, kind)| *kind).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// The table as lines; the last column is not padded. Widths count characters.
    pub fn render(&self, style: Style) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        let lines =
            std::iter::once((&header, true)).chain(self.rows.iter().map(|row| (row, false)));
        for (cells, is_header) in lines {
            let mut line = String::new();
            for (index, cell) in cells.iter().enumerate() {
                let last = index + 1 == columns;
                let pad = widths[index] - cell.chars().count();
                let kind = self.kinds[index];
                let shown = if is_header {
                    style.bold(cell)
                } else if kind == Column::State {
                    style.state(cell)
                } else {
                    cell.clone()
                };
                if kind == Column::Number {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(&shown);
                } else {
                    line.push_str(&shown);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    line.push_str("  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut table = Table::new(&[
            ("ID", Column::Number),
            ("STATE", Column::State),
            ("PATH", Column::Text),
        ]);
        table.row(vec!["0".into(), "online".into(), "/dev/nvme0n1".into()]);
        table.row(vec!["12".into(), "failed".into(), "/x".into()]);
        assert_eq!(
            table.render(Style::PLAIN),
            "ID  STATE   PATH\n 0  online  /dev/nvme0n1\n12  failed  /x\n"
        );
    }
}

//! Where command output goes: a buffered stdout, or a buffer in tests; and the plain
//! tables the listing commands print.

use std::io::{self, IsTerminal, Write};

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Width, presets};

/// Command output. `writeln!(out, ...)` works on it.
pub struct Out {
    inner: Box<dyn Write + Send>,
    /// The terminal's width when stdout is one: tables are cut to it.
    width: Option<u16>,
}

impl Out {
    pub fn stdout() -> Out {
        let stdout = io::stdout();
        let width = stdout
            .is_terminal()
            .then(|| terminal_size::terminal_size_of(&stdout))
            .flatten()
            .map(|(w, _)| w.0);
        Out {
            inner: Box::new(io::BufWriter::new(stdout)),
            width,
        }
    }

    /// Writes `value` as one line of JSON.
    pub fn json_line(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.inner, value)?;
        self.inner.write_all(b"\n")
    }

    /// Writes `value` as pretty JSON.
    pub fn json_pretty(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.inner, value)?;
        self.inner.write_all(b"\n")
    }

    /// The lines of `table` as this output shows them: the header, then one line per
    /// row.
    pub fn table_lines(&self, table: Table) -> Vec<String> {
        table.lines(self.width)
    }

    /// Writes `table`, each line after `indent`.
    pub fn table(&mut self, table: Table, indent: &str) -> io::Result<()> {
        for line in self.table_lines(table) {
            writeln!(self.inner, "{indent}{line}")?;
        }
        Ok(())
    }
}

/// A table as `ps` and `systemctl list-units` print one: a header in capitals, columns
/// two spaces apart and as wide as their widest cell, no borders, no colour. On a
/// terminal the last column is cut to the terminal's width with `…` (the others never
/// are); into a pipe or a file every line is whole.
pub struct Table {
    inner: comfy_table::Table,
    /// The last column's header, which is never cut.
    last_header: u16,
    /// Columns aligned to the right (numbers).
    right: Vec<usize>,
}

impl Table {
    pub fn new<const N: usize>(header: [&str; N]) -> Table {
        let mut inner = comfy_table::Table::new();
        inner.load_style(presets::NOTHING);
        inner.set_header(header);
        let last_header = header.last().map_or(0, |h| h.chars().count());
        Table {
            inner,
            last_header: u16::try_from(last_header).unwrap_or(u16::MAX),
            right: Vec::new(),
        }
    }

    /// Right-aligns column `index`, its header included.
    pub fn right_aligned(mut self, index: usize) -> Table {
        self.right.push(index);
        self
    }

    /// Adds a row; a line break in a cell becomes a space, so each row is one line.
    pub fn row<const N: usize>(&mut self, cells: [&str; N]) {
        self.inner.add_row(cells.map(|c| c.replace('\n', " ")));
    }

    fn lines(mut self, width: Option<u16>) -> Vec<String> {
        let last = self.inner.column_count().saturating_sub(1);
        for (i, column) in self.inner.column_iter_mut().enumerate() {
            column.set_padding((0, if i == last { 0 } else { 2 }));
            if self.right.contains(&i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
            if i == last {
                // Cut rather than wrapped at word boundaries, which would keep less.
                column.set_delimiter('\0');
                column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(
                    self.last_header,
                )));
            } else {
                column.set_constraint(ColumnConstraint::ContentWidth);
            }
        }
        if let Some(width) = width {
            self.inner
                .set_width(width)
                .set_content_arrangement(ContentArrangement::Dynamic);
            for row in self.inner.row_iter_mut() {
                row.max_height(1);
            }
        }
        self.inner
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect()
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        // A closed pipe at exit is not an error worth reporting.
        self.inner.flush().ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn souls() -> Table {
        let mut t = Table::new(["ID", "ITERS", "MODEL", "DESCRIPTION"]).right_aligned(1);
        t.row([
            "safe_assistant",
            "10",
            "anthropic/claude-sonnet-4-5",
            "Asks first",
        ]);
        t.row([
            "x",
            "100",
            "m",
            "A soul with a long description\nover two lines",
        ]);
        t
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_two_spaces_apart() {
        assert_eq!(
            souls().lines(None),
            [
                "ID              ITERS  MODEL                        DESCRIPTION",
                "safe_assistant     10  anthropic/claude-sonnet-4-5  Asks first",
                "x                 100  m                            A soul with a long description over two lines",
            ]
        );
    }

    #[test]
    fn on_a_terminal_only_the_last_column_is_cut() {
        let lines = souls().lines(Some(64));
        assert_eq!(
            lines,
            [
                "ID              ITERS  MODEL                        DESCRIPTION",
                "safe_assistant     10  anthropic/claude-sonnet-4-5  Asks first",
                "x                 100  m                            A soul with…",
            ]
        );
    }

    /// `familiar tasks` puts each task's approvals under its line: a row must never
    /// take two, however narrow the terminal.
    #[test]
    fn every_row_is_one_line_however_narrow() {
        for width in [0, 20, 40, 300] {
            let lines = souls().lines(Some(width));
            assert_eq!(lines.len(), 3, "width {width}: {lines:#?}");
            assert!(lines[0].ends_with("DESCRIPTION"), "{lines:#?}");
        }
    }
}

/**
 * Plain-text tables for human output: a header row in capitals, columns padded to their widest
 * cell and separated by three spaces, no trailing blanks. Scripts should use --json instead;
 * this layout may change.
 */
export interface Column<Row> {
  /** Printed in capitals. */
  readonly header: string;
  readonly cell: (row: Row) => string;
  /** Right-align (numbers). Default left. */
  readonly align?: 'left' | 'right';
}

const GAP = '   ';

/** The table as text, one line per row after the header, ending with a newline. */
export function formatTable<Row>(columns: readonly Column<Row>[], rows: readonly Row[]): string {
  const cells = [columns.map((c) => c.header.toUpperCase()), ...rows.map((r) => columns.map((c) => oneLine(c.cell(r))))];
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => (line[i] ?? '').length)));
  const lines = cells.map((line) =>
    line
      .map((cell, i) => {
        const width = widths[i] ?? 0;
        return columns[i]?.align === 'right' ? cell.padStart(width) : cell.padEnd(width);
      })
      .join(GAP)
      .trimEnd(),
  );
  return `${lines.join('\n')}\n`;
}

/** Key/value pairs as a two-column listing ("KEY   value"), for single objects. */
export function formatFields(fields: readonly (readonly [string, string])[]): string {
  const width = Math.max(0, ...fields.map(([k]) => k.length));
  return fields.map(([k, v]) => `${`${k}:`.padEnd(width + 1)}  ${oneLine(v)}`.trimEnd()).join('\n') + (fields.length > 0 ? '\n' : '');
}

/** A cell never breaks the layout: newlines and tabs become spaces. */
const oneLine = (s: string): string => s.replace(/[\r\n\t]+/g, ' ');

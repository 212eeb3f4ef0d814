/** The one thing every data module needs: run a statement. Satisfied by `Pg`. */
export interface Sql {
  /** `name`: a prepared statement, where the connection keeps them (ignored otherwise). */
  query<R = Record<string, unknown>>(text: string, params?: unknown[], name?: string): Promise<{ rows: R[]; rowCount: number | null }>;
}

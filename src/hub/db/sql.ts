/** The one thing every data module needs: run a statement. Satisfied by `Pg`. */
export interface Sql {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[]; rowCount: number | null }>;
}

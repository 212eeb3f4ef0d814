/** Where the run's database listens, so a test can put a proxy of its own in front of it. */
export async function findProxyTarget(databaseUrl: string, _sharedProxy: string): Promise<{ host: string; port: number }> {
  const u = new URL(databaseUrl);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || 5432) };
}

// What the Text rule in wrangler.toml makes of the dashboard's files when the Worker imports them:
// the file's content as a string (workerd and vitest-pool-workers both apply the rule).
declare module '../dashboard/static/*' {
  const text: string;
  export default text;
}

/** node-gyp-build ships no types: the two calls the addon loader makes of it. */
declare module 'node-gyp-build' {
  interface NodeGypBuild {
    /** Loads the addon of the package at `root` (a local build, else a fitting prebuild). */
    (root: string): unknown;
    /** The file it would load; throws "No native build was found for ..." when none fits. */
    resolve(root: string): string;
  }
  const load: NodeGypBuild;
  export = load;
}

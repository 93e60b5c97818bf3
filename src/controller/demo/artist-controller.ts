import { keyOf, type Resource } from '../../client/index.js';
import { writeStatus } from '../runtime/status.js';
import type { ControllerSpec } from '../runtime/types.js';

export const DEMO_ARTIST_CONTROLLER = 'demo.v1.artist-controller';

/**
 * The demo controller (`cairn agent --demo-controllers`): on every demo.v1.Artist it sets the
 * status condition `Accepted` TRUE with the number of demo.v1.Album resources the artist owns,
 * for the artist's current generation. It watches albums (an album maps to its owning artist),
 * so adding or deleting an owned album updates the count. It shows the runtime end to end and
 * is what the leader-failover tests converge on.
 */
export function demoArtistController(): ControllerSpec {
  return {
    name: DEMO_ARTIST_CONTROLLER,
    managedType: 'demo.v1.Artist',
    managedScope: 'namespace',
    watches: [{ type: 'demo.v1.Album', scope: 'namespace', map: (album) => (album.owner !== null && /^demo\.v[0-9]+\.Artist$/.test(album.owner.type) ? [keyOf(album.owner)] : []) }],
    async reconcile(key, ctx) {
      const artist = ctx.cache<{ name: string }>('demo.v1.Artist').get(key);
      if (artist === undefined || artist.deletion_timestamp !== null) return; // gone: nothing to report on
      let albums = 0;
      for (const a of ctx.cache('demo.v1.Album').list() as Array<Resource<unknown>>) if (a.owner?.uid === artist.id.uid) albums++;
      await writeStatus(ctx, artist, [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: `${albums} album${albums === 1 ? '' : 's'}` }]);
    },
  };
}

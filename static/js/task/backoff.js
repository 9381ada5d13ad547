// The waits between tries to reconnect (docs/pages.md: data-connection).

// The longest wait before each try after a close: the n-th try waits between half and all
// of the n-th ceiling, at random (so that pages dropped together do not return together);
// the last ceiling repeats for every later try.
export const RETRY_CEILINGS_MS = [500, 1000, 2000, 4000, 8000, 10000];

/** Return the wait before the next try, after `failures` failed tries in a row. */
export function retryDelay(ceilings, failures, random = Math.random) {
  const ceiling = ceilings[Math.min(failures, ceilings.length - 1)];
  return ceiling / 2 + (random() * ceiling) / 2;
}

/** The CI-sized swarm, first half (swarm-half.ts says what it runs). */
import { swarmHalf } from './swarm-half.js';

swarmHalf(0);

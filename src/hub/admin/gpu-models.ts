import { z } from '@hono/zod-openapi';

/** The models a `gpus_by_model` leaves out, summed. */
export const OtherGpuModels = z
  .object({
    models: z.number().int().openapi({ description: 'how many models are not listed (0: all are)' }),
    count: z.number().int().openapi({ description: 'their GPUs' }),
    unhealthy: z.number().int().openapi({ description: 'their GPUs whose health is not healthy' }),
  })
  .openapi('OtherGpuModels');

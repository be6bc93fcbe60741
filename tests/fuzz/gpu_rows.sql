-- GPU rows for the trace_reader seed gpu_rows.sqlite (make_seeds.sh applies this to the one-rank
-- CPU trace): no CUDA machine here records a real GPU trace, and byte mutations never turn a CPU
-- trace's track kinds into "stream" or "cuda_api", so without these rows the fuzzer would not reach
-- the GPU lanes, slice details, kernel and idle summaries, memory series and the GPU export paths.
-- A kernel launch, a copy, a memset and a sync with their API calls (correlation ids 1-3) on a
-- CUDA API track and a stream, device-memory events and a gpu_memory row, as the writer stores them.
INSERT INTO string(text) VALUES ('cudaLaunchKernel'),('api'),('moe_fwd_kernel'),('kernel'),('memcpy'),('memset'),('_Z14moe_fwd_kernelv'),('moe.fwd'),('cudaMemcpyAsync'),('weights'),('activations'),('sync'),('cudaStreamSynchronize');
INSERT INTO track(id,name,kind,rank,thread_id) VALUES (3,'cuda api','cuda_api',0,28753),(4,'stream 7','stream',0,7),(5,'device memory','memory',0,0);
INSERT INTO slice(id,track,start_ns,dur_ns,name,category,step,layer,correlation_id,depth) VALUES
 (9001,3,(SELECT min(start_ns) FROM slice)+16483,2000,(SELECT id FROM string WHERE text='cudaLaunchKernel'),(SELECT id FROM string WHERE text='api'),0,0,1,0),
 (9002,4,(SELECT min(start_ns) FROM slice)+18683,5000,(SELECT id FROM string WHERE text='moe_fwd_kernel'),(SELECT id FROM string WHERE text='kernel'),0,0,1,0),
 (9003,3,(SELECT min(start_ns) FROM slice)+26683,1000,(SELECT id FROM string WHERE text='cudaMemcpyAsync'),(SELECT id FROM string WHERE text='api'),0,0,2,0),
 (9004,4,(SELECT min(start_ns) FROM slice)+27683,300,(SELECT id FROM string WHERE text='memcpy'),(SELECT id FROM string WHERE text='memcpy'),0,0,2,0),
 (9005,4,(SELECT min(start_ns) FROM slice)+28083,200,(SELECT id FROM string WHERE text='memset'),(SELECT id FROM string WHERE text='memset'),0,-1,3,0),
 (9006,3,(SELECT min(start_ns) FROM slice)+28683,900,(SELECT id FROM string WHERE text='cudaStreamSynchronize'),(SELECT id FROM string WHERE text='sync'),0,-1,0,0);
INSERT INTO cuda_api VALUES (9001,'runtime',211,28753,0,(SELECT id FROM string WHERE text='moe.fwd')),(9003,'runtime',41,28753,0,(SELECT id FROM string WHERE text='moe.fwd'));
INSERT INTO gpu_kernel VALUES (9002,0,7,64,1,1,256,1,1,32,0,4096,(SELECT id FROM string WHERE text='_Z14moe_fwd_kernelv'),(SELECT id FROM string WHERE text='moe_fwd_kernel'),(SELECT id FROM string WHERE text='moe.fwd'));
INSERT INTO gpu_memcpy VALUES (9004,0,7,1,2,3,4096,(SELECT id FROM string WHERE text='moe.fwd'));
INSERT INTO gpu_memset VALUES (9005,0,7,1024,0,3,(SELECT id FROM string WHERE text='moe.fwd'));
INSERT INTO gpu_sync VALUES (9006,3,7,0,(SELECT id FROM string WHERE text='moe.fwd'));
INSERT INTO memory_event(track,ts_ns,step,kind,bytes,address,category,in_use_bytes) VALUES
 (5,(SELECT min(start_ns) FROM slice),-1,'alloc',1048576,0,(SELECT id FROM string WHERE text='weights'),1048576),
 (5,(SELECT min(start_ns) FROM slice)+16683,0,'alloc',65536,140000000000,(SELECT id FROM string WHERE text='activations'),65536),
 (5,(SELECT min(start_ns) FROM slice)+36683,0,'free',65536,140000000000,(SELECT id FROM string WHERE text='activations'),0);
INSERT INTO gpu_memory(track,ts_ns,kind,memory_kind,bytes,address,device_id,stream_id,correlation_id,step,layer,phase) VALUES
 (3,(SELECT min(start_ns) FROM slice)+16683,'alloc',3,65536,140000000000,0,7,4,0,0,(SELECT id FROM string WHERE text='moe.fwd'));

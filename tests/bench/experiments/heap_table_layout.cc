// heap_table_layout.cc — stand-alone micro-experiment behind fix 1 of docs/benchmarks.md:
// what a flat per-key-group table would give the heap backend's ValueState read-modify-write,
// next to the current layout (per key group unordered_map<std::string,std::string>, get + put),
// the same with one lookup (element cached between get and put), and the raw
// unordered_map<uint64,int64>. Same keys as jobhost-bench (splitmix64, Serializer<int64_t>,
// keyGroupFor). Not built by CMake; from the repository root, after building:
//
//   g++ -O2 -std=c++20 -Ihost -Isdk/include -Istate/include tests/bench/experiments/heap_table_layout.cc \
//       build/host/libjobhost_host.a build/state/libjobhost_state.a -lrocksdb -lcapnp -lkj -lspdlog -lfmt \
//       -lpthread -o /tmp/heap_table_layout && /tmp/heap_table_layout 1000000 && /tmp/heap_table_layout 10000000
#include <unordered_map>
#include <string>
#include <cstdio>
#include <chrono>
#include <vector>
#include <cstring>
#include <algorithm>
#include "runtime/key_group_assignment.h"
#include "jobhost/serializer.h"
static uint64_t mix(uint64_t x){x+=0x9e3779b97f4a7c15ULL;x=(x^(x>>30))*0xbf58476d1ce4e5b9ULL;x=(x^(x>>27))*0x94d049bb133111ebULL;return x^(x>>31);}
using clk=std::chrono::steady_clock;
// Open addressing, linear probing, 48-byte slots: hash, key (<=15 B inline), value (<=15 B inline).
struct Slot { uint64_t h; uint8_t klen, vlen; char key[15]; char val[15]; };
static_assert(sizeof(Slot)==40);
struct Flat {
  std::vector<Slot> s; size_t n=0, mask=0;
  Flat(){ s.resize(16); mask=15; for(auto&x:s) x.h=0; }
  static uint64_t hash(std::string_view k){ uint64_t h=1469598103934665603ULL; for(unsigned char c:k){h^=c;h*=1099511628211ULL;} h^=h>>33; h*=0xff51afd7ed558ccdULL; h^=h>>33; return h|1; }
  Slot* find(std::string_view k, uint64_t h){ for(size_t i=h&mask;;i=(i+1)&mask){ Slot&x=s[i]; if(!x.h) return nullptr; if(x.h==h&&x.klen==k.size()&&!memcmp(x.key,k.data(),k.size())) return &x; } }
  Slot* insert(std::string_view k, uint64_t h){ if((n+1)*8>s.size()*7) grow(); for(size_t i=h&mask;;i=(i+1)&mask){ Slot&x=s[i]; if(!x.h){ x.h=h; x.klen=k.size(); memcpy(x.key,k.data(),k.size()); x.vlen=0; ++n; return &x;} if(x.h==h&&x.klen==k.size()&&!memcmp(x.key,k.data(),k.size())) return &x; } }
  void grow(){ std::vector<Slot> old; old.swap(s); s.resize(old.size()*2); for(auto&x:s) x.h=0; mask=s.size()-1; n=0; for(auto&x:old) if(x.h){ Slot* y=insert({x.key,x.klen},x.h); y->vlen=x.vlen; memcpy(y->val,x.val,x.vlen);} }
};
int main(int argc,char**argv){
  const uint64_t n=strtoull(argv[1],0,10), ops=2000000;
  std::vector<std::unordered_map<std::string,std::string>> t(128);
  std::vector<Flat> f(128);
  std::unordered_map<uint64_t,int64_t> raw;
  std::string kb, vb;
  for(uint64_t i=0;i<n;i++) raw[mix(i)]=i;
  for(uint64_t i=0;i<n;i++){ jobhost::serializeInto(kb,(int64_t)mix(i)); int kg=jobhost::host::keyGroupFor(kb,128); t[kg][kb]="12345678"; }
  for(uint64_t i=0;i<n;i++){ jobhost::serializeInto(kb,(int64_t)mix(i)); int kg=jobhost::host::keyGroupFor(kb,128); Slot* x=f[kg].insert(kb,Flat::hash(kb)); x->vlen=8; memcpy(x->val,"12345678",8); }
  { size_t slots=0; for(auto&x:f) slots+=x.s.size(); printf("flat: %.1f B/entry of slots\n", slots*40.0/n); }
  double tot[4]={0,0,0,0};
  for (int rep=0;rep<5;rep++){
    uint64_t seed=88172645463325252ULL+rep; size_t sink=0;
    auto run=[&](int which, auto fn){ uint64_t ss=seed; auto t0=clk::now(); for(uint64_t i=0;i<ops;i++){ ss^=ss<<13;ss^=ss>>7;ss^=ss<<17; sink+=fn(mix(ss%n)); } double d=std::chrono::duration<double>(clk::now()-t0).count(); tot[which]+=d; };
    run(0,[&](uint64_t k){ raw[k]+=1; return 1; });
    run(1,[&](uint64_t k){ jobhost::serializeInto(kb,(int64_t)k); int kg=jobhost::host::keyGroupFor(kb,128); auto it=t[kg].find(kb); int64_t v; memcpy(&v,it->second.data(),8); ++v; vb.assign((char*)&v,8); auto it2=t[kg].find(kb); it2->second.assign(vb); return 1; });
    run(2,[&](uint64_t k){ jobhost::serializeInto(kb,(int64_t)k); uint64_t h=Flat::hash(kb); int kg=(int)(h%128); (void)kg; int kg2=jobhost::host::keyGroupFor(kb,128); Slot* x=f[kg2].find(kb,h); int64_t v; memcpy(&v,x->val,8); ++v; memcpy(x->val,&v,8); return 1; });
    run(3,[&](uint64_t k){ jobhost::serializeInto(kb,(int64_t)k); int kg=jobhost::host::keyGroupFor(kb,128); auto it=t[kg].find(kb); int64_t v; memcpy(&v,it->second.data(),8); ++v; vb.assign((char*)&v,8); it->second.assign(vb); return 1; });
    if(sink==42) printf("x");
  }
  printf("n=%llu: raw u64 RMW %.1f ns/op; per-kg unordered_map<string,string> get+put %.1f ns/op (%.2fx raw); per-kg flat 40B-slot table %.1f ns/op (%.2fx raw)\n",(unsigned long long)n, tot[0]/5/ops*1e9, tot[1]/5/ops*1e9, tot[0]/tot[1], tot[2]/5/ops*1e9, tot[0]/tot[2]); printf("   per-kg unordered_map one lookup (cached element) %.1f ns/op (%.2fx raw)\n", tot[3]/5/ops*1e9, tot[0]/tot[3]);
}

// The built-in calibration text of `tessera quantize`: short stories written
// for Tessera in plain, everyday English (the register of the small story
// models it is tested with), so quantizing never needs a download and never
// sees the text a model is evaluated on. Pass --calib FILE for a model of
// another domain.
#include "quant/calibration.h"

namespace tessera::quant {

std::string_view default_calibration_text() {
  return R"(Once upon a time, there was a small brown dog named Pip. Pip lived in a house with a red door and a big garden. Every morning, Pip ran to the gate to see the mailman. The mailman always had a treat in his pocket. One day, the mailman did not come. Pip waited and waited. He was sad and lay down by the gate. Then a little girl named Rosa walked by. She saw Pip and said, "Why are you sad, little dog?" Pip wagged his tail. Rosa sat down next to him and they waited together. At last the mailman came down the street on his bike. "Sorry I am late!" he said. "My bike had a flat tire." He gave Pip two treats that day, one for waiting and one for being a good friend. Pip was happy again, and Rosa laughed.

Tom and his mom went to the park on a sunny day. Tom wanted to play on the swings, but the swings were full. He felt angry and stamped his foot. His mom knelt down and said, "Let's play in the sand while we wait." Tom made a big castle with a tower and a wall. A boy came over and asked, "Can I help?" Tom did not want to share at first. Then he saw that the boy had a little bucket shaped like a star. "Yes," Tom said. "You can make the stars on the wall." The two boys worked together, and the castle was the best one in the whole park. When a swing was free, Tom said, "You can go first." The boy smiled, and they took turns until it was time to go home.

Lily had a blue kite. She loved to fly it on the hill behind her school. One windy afternoon, the string slipped out of her hand. The kite flew up, up, up, and landed in a tall tree. Lily began to cry. An old man who was walking his cat saw her. "Don't worry," he said. "I have a long stick at home." He came back with the stick and gently pulled the kite down. One corner was torn. Lily's dad helped her fix it with tape and a bit of string. The next day the kite flew again, higher than ever. Lily waved to the old man and his cat, and they waved back.

There was once a tiny fish called Bubbles who lived in a pond. Bubbles wanted to see what was on the other side of the big rock. Her mother said, "Stay close, it is not safe." But Bubbles was curious. She swam around the rock and found a dark cave. Inside the cave was a crab with big claws. Bubbles was scared and swam back as fast as she could. "Mother, you were right!" she said. Her mother hugged her with her fins. "It is good to be curious," her mother said, "but it is also good to listen." The next day they went to see the cave together, and the crab turned out to be friendly after all. He only wanted someone to talk to.

Sam loved to help his grandma bake. On Saturday they made cookies with oats and raisins. Sam poured the flour and cracked the eggs. Grandma let him stir the bowl with a big wooden spoon. When the cookies came out of the oven, the kitchen smelled sweet and warm. Sam wanted to eat them all, but Grandma said, "Let's share them with the neighbors." They put the cookies in a basket and knocked on every door on the street. Mrs. Green gave them flowers from her garden. Mr. Lee gave them a jar of honey. When they got home, the basket was empty, but their hands were full.

In a quiet forest, a little owl could not sleep. The moon was bright and the wind was loud. "Mama," said the owl, "why is the night so noisy?" Mama owl pointed with her wing. "Listen. That is the river singing. That is the frog saying good night. That is the wind telling stories to the trees." The little owl listened. The river sang, the frog croaked, and the trees whispered. Soon the noise did not feel scary anymore. It felt like a song. The little owl closed his eyes and fell asleep on the soft branch.

Mia found a shiny stone on the beach. It was smooth and green, like a drop of the sea. She put it in her pocket and showed it to her brother Ben. "Can I have it?" Ben asked. Mia thought about it. She loved the stone, but she loved her brother too. "We can both keep it," she said. "On Monday it is yours, and on Tuesday it is mine." Ben liked that idea. They made a little box for the stone with their names on the lid. Every night the box moved from one room to the other, and every night someone was happy to see it.

A big truck got stuck in the mud near the farm. The driver tried to push it, but it would not move. The farmer came with his old horse, Daisy. "Daisy is strong," said the farmer. They tied a rope to the truck and Daisy pulled and pulled. Slowly, the wheels turned and the truck rolled out of the mud. The driver cheered and gave Daisy a big red apple. "Thank you," he said. "I thought trucks were stronger than horses, but today a horse saved a truck." Daisy ate her apple and neighed, as if she was laughing.

Anna did not like the rain. She wanted to go outside and ride her bike. Her dad gave her a yellow coat and big boots. "Let's go for a rain walk," he said. They jumped in puddles and watched the worms come out of the ground. They saw a snail climbing a wall very slowly. Anna counted the drops on a leaf. When they came back inside, they drank hot milk and looked out of the window. "Dad," Anna said, "I think I like the rain now." Her dad smiled and said, "Every kind of weather has something fun in it."

Max was a little robot who lived in a toy shop. At night, when the shop was closed, the toys came alive. Max liked to fix things. He fixed the wheel of a toy car and the arm of a teddy bear. One night, the music box stopped playing. All the toys were sad, because they loved to dance. Max opened the music box and found a tiny spring that was bent. He bent it back very carefully. The music began again, and all the toys danced until the sun came up. In the morning, the shop owner found the music box playing by itself, and she never knew why.
)";
}

}  // namespace tessera::quant
